"""Black-box tests: a real ``rtr-serve`` process, driven only from outside."""
