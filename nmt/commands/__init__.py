"""The file-in, file-out commands as functions: translate, score, eval, align, plot attention.

Each reads its inputs, checks its outputs before any work, calls the core (`decode`,
`evaluate`) and writes atomically; `nmt.cli` parses the arguments and calls one of them.
"""
