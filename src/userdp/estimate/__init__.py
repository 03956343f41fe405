"""Smooth bounding of user contributions (Epasto et al., NeurIPS 2020): weighted mean,
quantiles, label-private linear regression and weighted ERM, against sample limiting."""
