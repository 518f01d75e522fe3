"""Producers of collective algorithms: classic baselines (and topology-aware synthesis)."""
