"""Everything that touches the world: memory readers, the sampler, the Ollama
wrapper, the measurement procedures, coherence checks and the memory model.
Never imports ``assistant``."""
