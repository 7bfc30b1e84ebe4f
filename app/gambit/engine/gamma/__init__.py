"""The γ policy: what decides each round's draft length. ``policy`` is its
vocabulary (the modes, the defaults, ``FixedGamma``); ``controller`` the
adaptive one, with what it learns, how it prices a round and how it says why
in ``controller_learning``, ``controller_pricing`` and ``controller_wording``;
``calibration`` measures the costs it starts from on this machine and keeps
them; ``metrics`` is what a reply measured, the figures the policy is judged
by. Its estimates of costs and acceptance, ``gambit.engine.estimates``, sit
one level up, since the machine's placement reads them too. Of the engine it
may import ``estimates``, ``text`` (the reply's records), ``machine``
(calibration runs the runtime) and ``drafters`` (their tags); outside the
engine the controller's pieces are never imported (an import contract).
"""
