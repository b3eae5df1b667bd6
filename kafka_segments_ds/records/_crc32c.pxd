# Declarations of the CRC-32C C helpers (_crc32c.h), shared by the extensions that checksum.
from libc.stdint cimport uint8_t, uint32_t


cdef extern from "_crc32c.h" nogil:
    int ksds_hardware
    void ksds_crc_init()
    uint32_t ksds_crc32c(const uint8_t *buf, size_t n)
    uint32_t ksds_crc_tables(const uint8_t *buf, size_t n)
