"""Memory profiles below the command line: where they live and which one a run reads (`store`), how a finished
solve run or chat teaches its agent one (`learn`), and how an eval batch learns its own from its first tasks
(`warmup`). The profiles themselves, and their calibration, are kvstore's (kvstore.profiles.profile,
kvstore.profiles.calibrate)."""
