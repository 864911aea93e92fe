"""What HornetQ, Artemis's ancestor, adds on top of the common broker: its dialect (dialect.py)."""
