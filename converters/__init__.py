"""Format converters, imported as ``chakra_collectives.converters``.

* :mod:`.chakra_et` -- Chakra execution traces (``PREFIX.{rank}.et``), read and write.
"""
