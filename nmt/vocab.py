"""The special token ids that every tokenizer, model and search agree on.

They live here, below both the data and the model layers, so the network never imports the
tokenizer (and with it SentencePiece) to know which id is padding.
"""

PAD, UNK, BOS, EOS = 0, 1, 2, 3
