"""``python -m chakra_collectives ...`` runs ``chakra-coll ...``."""

from chakra_collectives.cli import main

if __name__ == "__main__":
    main()
