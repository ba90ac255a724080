"""What both decoding engines share, without torch: text in and text out (`translation`), and
how hypotheses are ranked and when a beam may stop (`ranking`). The torch decoder
(`nmt.decode`) and the onnxruntime one (`nmt.runtime`) build on it and never on each other."""
