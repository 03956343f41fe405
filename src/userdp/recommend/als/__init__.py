"""The matrix-factorization family: :class:`~userdp.recommend.MatrixFactorization`
(``estimator``; Krichene et al. 2023, Algorithm 3) and its driver-side item update (``steps``:
task-weighted SSP, the implicit term's Gram, the items trained).

It builds on :mod:`userdp.recommend.core` and :mod:`userdp.recommend.engines` only.
"""
