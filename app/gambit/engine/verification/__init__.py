"""The exact verification: logits to the one processed distribution that draft
and target both sample from (``sampling``), token trees (``tree``), and the
rejection sampling that keeps speculation lossless (``verify``). Pure numpy:
it imports nothing else of Gambit, so whatever samples or checks a draft (the
drafters, the decoder, the reply's records) may import it.
"""
