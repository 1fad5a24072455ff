"""embinit service: the HTTP API for experiments (FastAPI), its state database and the Ray runner."""
