"""Python ops on Teams: peer transfers by mechanism, collectives, baselines."""
