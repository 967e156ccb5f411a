"""Ops that only circle files (Samsung ONE) have: attention, rotary embeddings, GRU, RMS normalization, binary-coded
quantization, and running another model.  Their modules register themselves (``ops._catalog``)."""
