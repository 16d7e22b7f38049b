"""DEFECT (G03): a NaN-aware maximum that maps NaN to +Inf, so a row holding a NaN reports +Inf.
Passes allclose on finite inputs. G03 accepts ±Inf where the oracle is NaN only in runs that inject
±Inf (an indeterminate form of the oracle's own order); in the NaN-only run the NaN comes from an
input and +Inf there is a lost NaN."""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.where(torch.isnan(x), torch.full_like(x, float("inf")), x).amax(dim=-1)
