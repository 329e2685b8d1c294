"""OpenCL kernel templates (Mako), shipped as the package ``pybp.templates``."""
