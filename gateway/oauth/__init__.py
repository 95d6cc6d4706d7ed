"""OAuth 2.1 resource server: JWT access tokens checked against the issuer's published keys.

- ``validation``: pure checks of one token against one key and one policy (no I/O, the clock
  passed in);
- ``keys``: the issuer's key set (JWKS), discovered from its metadata, cached, refreshed;
- ``gate``: which policy guards which path, and the verdict for a presented token.
"""
