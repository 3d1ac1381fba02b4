"""The throwaway CA of the security tests: the secure example's (tools/secure_example.py)."""

from __future__ import annotations

from tools.secure_example import CertificateAuthority, Issued

TestCA = CertificateAuthority
TestCA.__test__ = False  # not a pytest class

__all__ = ["Issued", "TestCA"]
