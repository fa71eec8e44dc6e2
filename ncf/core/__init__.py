"""The ground floor every stage may import: shared names, crash-safe writes, digests, DLLogger,
fault points and the typed-config machinery. It imports no stage."""
