"""The simulator (#26): snapshots, traces and replays of them through the pure core."""
