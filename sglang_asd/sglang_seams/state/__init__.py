"""What the seams share and hook nothing: the device ledger table, a request's host ledger and
receipt, the per-round output carried from verify to the host, the per-process runtime settings and
the Prometheus metrics."""
