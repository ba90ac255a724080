"""nmt: attentional LSTM encoder-decoder translation, from data to BLEU."""

__version__ = "0.2.0"
