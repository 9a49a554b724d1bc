# pytest fixtures for pymemcache's integration tests (test_integration.py)
# run against ringcache: adapted from pymemcache 3.5.2's
# pymemcache/test/conftest.py (Apache License 2.0, Copyright 2012
# Pinterest.com): --server/--port name one node of a ringcache cluster (the
# client learns the whole membership from it); client_class gives
# ringcache's Client, PooledClient and a one-server HashClient, as the
# original gives pymemcache's; --tls-server/--tls-port name a node of a TLS
# cluster whose CA is --tls-ca (ringcache verifies with the system's CAs
# when given only an ssl.SSLContext: the runner sets SSL_CERT_FILE to that
# CA), and without them the TLS test skips.
import ssl
import socket

import pytest


def pytest_addoption(parser):
    parser.addoption('--server', action='store', default='localhost',
                     help='a ringcache node')
    parser.addoption('--port', action='store', default='11211',
                     help='its client port')
    parser.addoption('--tls-server', action='store', default=None,
                     help='a node of a TLS (-Z) ringcache cluster')
    parser.addoption('--tls-port', action='store', default=None,
                     help='its client port')
    parser.addoption('--tls-ca', action='store', default=None,
                     help='the CA that signed its certificate')


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs a running cluster")


@pytest.fixture(scope='session')
def host(request):
    return request.config.option.server


@pytest.fixture(scope='session')
def port(request):
    return int(request.config.option.port)


def _tls(request, name):
    v = getattr(request.config.option, name)
    if v is None:
        pytest.skip("no TLS node in this run (--tls-server, --tls-port, --tls-ca)")
    return v


@pytest.fixture(scope='session')
def tls_host(request):
    return _tls(request, "tls_server")


@pytest.fixture(scope='session')
def tls_port(request):
    return int(_tls(request, "tls_port"))


@pytest.fixture(scope='session')
def tls_context(request):
    return ssl.create_default_context(cafile=_tls(request, "tls_ca"))


def pytest_generate_tests(metafunc):
    if 'socket_module' in metafunc.fixturenames:
        metafunc.parametrize("socket_module", [socket])

    if 'client_class' in metafunc.fixturenames:
        from ringcache import PooledClient, Client, HashClient

        class HashClientSingle(HashClient):
            def __init__(self, server, *args, **kwargs):
                super(HashClientSingle, self).__init__(
                    [server], *args, **kwargs
                )

        metafunc.parametrize(
            "client_class", [Client, PooledClient, HashClientSingle]
        )
