"""IREE on Vulkan and Metal GPUs: ``engine`` compiles the partitions XLA's GPU rules allow for the device that
``vulkan`` describes (read from the Vulkan loader, without IREE).  Nothing is imported here."""
