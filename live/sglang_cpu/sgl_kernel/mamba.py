"""Mamba kernels are not available in servetwin's CPU stand-in."""

from __future__ import annotations

from sgl_kernel import _unsupported

causal_conv1d_fn_cpu = _unsupported("mamba.causal_conv1d_fn_cpu")
causal_conv1d_update_cpu = _unsupported("mamba.causal_conv1d_update_cpu")
chunk_gated_delta_rule_cpu = _unsupported("mamba.chunk_gated_delta_rule_cpu")
