# pytest fixtures for pymemcache's integration tests (test_integration.py)
# run against ringcache: adapted from pymemcache 3.5.2's
# pymemcache/test/conftest.py (Apache License 2.0, Copyright 2012
# Pinterest.com): --server/--port name one node of a ringcache cluster (the
# client learns the whole membership from it); client_class gives
# ringcache's Client, PooledClient and a one-server HashClient, as the
# original gives pymemcache's; no TLS node is run, so the TLS test skips.
import socket

import pytest


def pytest_addoption(parser):
    parser.addoption('--server', action='store', default='localhost',
                     help='a ringcache node')
    parser.addoption('--port', action='store', default='11211',
                     help='its client port')


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs a running cluster")


@pytest.fixture(scope='session')
def host(request):
    return request.config.option.server


@pytest.fixture(scope='session')
def port(request):
    return int(request.config.option.port)


@pytest.fixture(scope='session')
def tls_host():
    pytest.skip("no TLS node in this run (TLS from the library: tests/it/test_client_tls.py)")


@pytest.fixture(scope='session')
def tls_port():
    pytest.skip("no TLS node in this run")


@pytest.fixture(scope='session')
def tls_context():
    pytest.skip("no TLS node in this run")


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
