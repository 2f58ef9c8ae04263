"""Metrics for the evaluator engine (``create_evaluator(metrics=[...])``)."""

from __future__ import annotations

from pytorch_pfn_extras.training._metrics import AccuracyMetric

__all__ = ["AccuracyMetric"]
