"""The LMDB backend: the record-store protocol on one LMDB environment (docs/backends.md)."""
