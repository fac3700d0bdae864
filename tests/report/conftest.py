"""Report tests keep the figures they draw (save_figure replaced) to measure them: close them all
after each test, or pyplot counts them across tests and warns past 20 open figures (a test that
checks its plot draws without warnings then fails for its neighbours' figures)."""

import pytest


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")
