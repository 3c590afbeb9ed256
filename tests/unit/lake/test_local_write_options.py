"""Local Spark writes without the embedded timeline server and with direct markers
(docs/benchmarks.md, optimisation 1); a cluster master keeps Hudi's defaults."""

from tidelake.config import load_config
from tidelake.lake.hudi import write_options


def _options(master: str) -> dict[str, str]:
    lake = load_config(None, environ={"TIDELAKE_LAKE__SPARK__MASTER": master}).lake
    return write_options(lake, "shop", "orders", ["id"], {})


def test_local_master_writes_direct_markers_without_a_timeline_server() -> None:
    """With local[*] the driver is the only JVM: nothing to serve, markers are plain files."""
    opts = _options("local[2]")
    assert "false" == opts["hoodie.embed.timeline.server"]
    assert "DIRECT" == opts["hoodie.write.markers.type"]


def test_cluster_master_keeps_hudis_defaults() -> None:
    """Executors elsewhere use the embedded timeline server and its markers."""
    opts = _options("spark://spark-master:7077")
    assert "hoodie.embed.timeline.server" not in opts
    assert "hoodie.write.markers.type" not in opts


def test_hudi_options_of_the_config_still_win() -> None:
    """lake.hudi_options is merged last."""
    lake = load_config(None, environ={}).lake
    lake = lake.model_copy(
        update={"hudi_options": {"hoodie.write.markers.type": "TIMELINE_SERVER_BASED"}}
    )
    assert (
        "TIMELINE_SERVER_BASED"
        == write_options(lake, "shop", "orders", ["id"], {})["hoodie.write.markers.type"]
    )
