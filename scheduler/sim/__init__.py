"""The simulator: snapshots, traces and replays of them through the pure core."""
