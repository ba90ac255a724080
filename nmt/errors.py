"""The one error type users see: the CLI prints it as a single line and exits with code 2."""


class NMTError(Exception):
    """A problem with the user's input (files, config, checkpoint), not a bug in nmt."""
