"""Parsing backends behind one interface (:class:`gpu_stage.backends.base.Backend`)."""
