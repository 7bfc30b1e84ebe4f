"""Text in and out: chat messages to prompt tokens through the model's template,
run in a sandbox (``chat``, ``template_sandbox``); what a reply is asked for
and what each of its rounds produced (``reply``); the reply's text as its
tokens arrive (``text_stream``), revealed evenly (``pacing``), and continued
where it was cut (``continuation``). Of the engine it may import ``machine``
(the runtime that tokenizes) and ``verification`` (the sampling a reply asks
for); nothing of the γ policy, the drafters or the decoder.
"""
