"""llama.cpp and the machine it runs on: the library loaded once
(``llama_lib``), what it can run here (``backend``, ``devices``), the
crash-safe kernel probe with its child process and the loads that follow its
verdict (``kernels``, ``kernel_child``, ``model_loading``), the numbers that
reach llama.cpp (``limits``), one model and its context (``runtime``, with the
token-list helpers ``tokens``), RPC workers and a target split over them in a
process of its own (``rpc``, ``placement``, ``target_host``), and whether other
programs kept the cores busy (``busy``). Of the engine it may import only
``gambit.engine.estimates`` (the costs a placement describes); below the
engine, ``formats``, ``fsutil``, ``errors`` and ``words``.
"""
