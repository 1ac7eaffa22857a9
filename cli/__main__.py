"""`python -m cli`: the same entry point as the `nexus-agent` script, for a checkout that is not installed."""

from cli.entry import main

main()
