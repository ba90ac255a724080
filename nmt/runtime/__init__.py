"""A decoder without torch: the ONNX graphs of `nmt export`, run by onnxruntime, searched with
numpy (greedy and beam, with the ranking rules of `nmt.text.ranking`). Imports only numpy,
onnxruntime, sentencepiece and nmt modules that do not import torch (a test holds it to that)."""
