"""Profiles: measured (or estimated) layer and sub-network times per processing element, and
fitted communication costs."""
from hetflow.profile.comm import fit_linear
from hetflow.profile.estimate import estimate_profile
from hetflow.profile.measure import profile_model, profile_subnets
from hetflow.profile.profile import PROFILE_VERSION, Profile

__all__ = ["PROFILE_VERSION", "Profile", "estimate_profile", "fit_linear", "profile_model",
           "profile_subnets"]
