"""The public-feature family: :class:`~userdp.recommend.PublicFeatureRecommender`
(``estimator``; AM-SSP, Krichene et al. 2023b), its encoder steps (``steps``), the convex
losses (``convex``) and the item encoders (``encoders``, ``id_encoder``, ``_flat``).

It builds on :mod:`userdp.recommend.core` and :mod:`userdp.recommend.engines` only.
"""
