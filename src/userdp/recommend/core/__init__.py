"""The recommenders' shared core: what both families build on and no engine.

The estimators' shared keywords and ``fit`` preamble (``base``), the frozen training specs
(``spec``), the one noise planner (``plans``), the empirical-Bayes bias prior (``prior``), the
item set (``items``), the private centring (``centring``), the released model (``model``),
the metrics and benchmark protocols (``metrics``, ``protocols``) and the steps shared by the
families and the runners (``steps``). Nothing here imports another part of
:mod:`userdp.recommend`.
"""
