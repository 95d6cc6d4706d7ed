"""Operations: Prometheus metrics, log formatting, the ring of recent warnings."""
