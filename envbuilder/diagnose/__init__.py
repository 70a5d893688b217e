"""Reading hosts and logs: doctor (host against an image) and explain (a failed job's log)."""
