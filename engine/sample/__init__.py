"""Stage 4, sampling on top of the scored tree (paper, section 3.3 and appendix F): the
next-byte distribution and prefix probabilities (:class:`~midword.engine.sample.sampling.ByteSampler`),
lazy prompt-boundary passes (PBP), token-level generation after a leaf, fill-in-the-middle
and byte-level ensembles. A new kind of request (a new decoding method) goes here.
"""
