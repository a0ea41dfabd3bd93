"""Helpers that run the Debian 12 RTR clients against rtr-serve and read what they hold."""
