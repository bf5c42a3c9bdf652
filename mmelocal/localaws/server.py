""":class:`LocalAws`: the local AWS for SageMaker MME on one port, as a context manager.

It mounts moto's server application in-process behind :class:`~.app.LocalAwsApp` on a
threaded WSGI server (a background thread), so a test, a benchmark or ``mmelocal
local-aws`` gets S3, SageMaker, Application Auto Scaling and STS on one URL, with real
Triton behind every endpoint. moto keeps its state in this process: two ``LocalAws`` in
one process keep their records apart, each in a moto account of its own
(:class:`MotoAccounts`); with ``data_dir`` it is saved at a clean stop and restored at
the next start (:mod:`.state`).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mmelocal.errors import EndpointFailedError, MissingDependencyError, UserInputError
from mmelocal.facts.aws import LOCAL, LOCAL_REGION, aws_client, new_session
from mmelocal.facts.sagemaker import SERVING_ENDPOINT_STATUSES
from mmelocal.localaws.app import INTERNAL_HEADER, OWN_HEADER, LocalAwsApp
from mmelocal.localaws.cloudwatch import ControlLoop, Running
from mmelocal.localaws.cloudwatch_api import CloudWatchOverlay
from mmelocal.localaws.endpoints import EndpointManager
from mmelocal.localaws.fleet import SHUT_DOWN_REASON, Fleet, FleetOptions, FleetPlan
from mmelocal.localaws.logs import LOGS_TARGET, LogShipper, logs_overlay
from mmelocal.localaws.proxy import CA_FILE, CertificateAuthority, HttpsProxy, is_loopback
from mmelocal.localaws.scaling import PAGED_OPERATIONS, Autoscaler, paged_records
from mmelocal.localaws.variants import EndpointPlan, plan_endpoint
from mmelocal.runtime.lifecycle import StartStopContext

logger = logging.getLogger(__name__)

#: keys mmelocal's own clients sign with (the local AWS checks no signature)
LOCAL_KEYS = ("mmelocal", "mmelocal")
DEFAULT_REGION = LOCAL_REGION
#: the X-Amz-Target prefixes of CloudWatch and Application Auto Scaling (JSON protocols)
CLOUDWATCH_TARGET = "GraniteServiceVersion20100801"
AUTOSCALING_TARGET = "AnyScaleFrontendService"


#: the first account :class:`MotoAccounts` hands out beside moto's default, less one
_OTHER_ACCOUNTS_BASE = 100_000_000_000


class MotoAccounts:
    """The moto accounts of the :class:`LocalAws` servers running in this process.

    moto keeps its records in process-global backends, one per account; a server files
    every request under its own account (the ``x-moto-account-id`` header its app sets), so
    two servers in one process see none of each other's buckets, models or endpoints. The
    first server while none runs gets moto's default account (``123456789012``); the
    others get accounts never handed out since none ran, so a stopped server's records,
    which stay in moto until the last server stops and clears them all, reach no one.
    Claims and releases come from any thread: a lock guards them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._issued = 0

    def claim(self, default: str) -> str:
        """An account for a server that starts (``default`` when none runs)."""
        with self._lock:
            if not self._running:
                self._issued = 0
                account = default
            else:
                self._issued += 1
                account = f"{_OTHER_ACCOUNTS_BASE + self._issued:012d}"
            self._running.add(account)
            return account

    def release(self, account: str, *, on_last: Callable[[], None]) -> None:
        """``account``'s server stopped: ``on_last`` (clear moto) runs, under the lock, when
        it was the last server running, so that no server starts meanwhile."""
        with self._lock:
            self._running.discard(account)
            if not self._running:
                on_last()


#: the process's registry (moto's backends are the process's)
MOTO_ACCOUNTS = MotoAccounts()


class LocalAws(StartStopContext):
    """S3, SageMaker (endpoints that serve), Application Auto Scaling and STS on one port.

    ``with LocalAws() as aws: os.environ["AWS_ENDPOINT_URL"] = aws.url`` is all a script
    needs. ``port=0`` picks a free port; ``data_dir`` holds each endpoint's artifact
    cache and Triton logs (a temporary folder by default) and, with ``persist`` (the
    default when ``data_dir`` is given), the state saved at a clean stop and restored at
    the next start (:mod:`.state`). ``memory_budget_bytes`` is the
    host memory per Triton instance without a GPU (default: half the RAM shared by the
    instances of an endpoint). ``time_scale`` runs the platform's clock that many times
    faster: CloudWatch periods of ``60 / time_scale`` real seconds, alarm evaluation and
    cooldowns on that clock (:mod:`.cloudwatch`, :mod:`.scaling`); timestamps stay real.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: Path | str | None = None,
        memory_budget_bytes: int | None = None,
        launcher: str = "local",
        tritonserver: Path | None = None,
        start_timeout_s: float = 300.0,
        persist: bool | None = None,
        time_scale: float = 1.0,
    ) -> None:
        if not time_scale > 0:
            raise UserInputError(f"time_scale must be > 0, got {time_scale}")
        self.time_scale = time_scale
        self.host = host
        self.persist = data_dir is not None if persist is None else persist
        if self.persist and data_dir is None:
            raise UserInputError("persist=True needs a data_dir to keep the state in")
        self.port = port
        self._data_dir = Path(data_dir) if data_dir is not None else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._start_timeout_s = start_timeout_s
        self._fleet_options = dict(
            memory_budget_bytes=memory_budget_bytes,
            launcher=launcher,
            tritonserver=tritonserver,
            start_timeout_s=start_timeout_s,
        )
        self._server: Any = None
        self._app: LocalAwsApp | None = None
        self._moto_app: Any = None
        self._restored = False
        self._thread: threading.Thread | None = None
        self._clients: dict[tuple[bool, str, str], Any] = {}
        self._clients_lock = threading.Lock()
        self.endpoints: EndpointManager | None = None
        self.clock: ControlLoop | None = None
        self.autoscaler: Autoscaler | None = None
        self._logs: LogShipper | None = None
        #: the moto account this server files its records under (set at start)
        self.account_id: str | None = None

    # -- public ------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """``http://host:port``: the value of ``AWS_ENDPOINT_URL``."""
        shown = self.host if self.host not in ("0.0.0.0", "", "::") else "127.0.0.1"
        return f"http://{shown}:{self.port}"

    @property
    def data_dir(self) -> Path:
        """Where the endpoints' caches and Triton logs go."""
        if self._data_dir is None:
            raise UserInputError("the local AWS is not started")
        return self._data_dir

    @property
    def ca_bundle(self) -> Path:
        """The certificate of the CA the local AWS's HTTPS proxy signs AWS's hosts with
        (the value of ``AWS_CA_BUNDLE``; :mod:`.proxy`)."""
        return self.data_dir / "ca" / CA_FILE

    def proxy_env(self) -> dict[str, str]:
        """``HTTPS_PROXY`` and ``AWS_CA_BUNDLE``: what reaches the local AWS from libraries
        that hard-code AWS's addresses (the SageMaker SDK's STS client; :mod:`.proxy`)."""
        return {"HTTPS_PROXY": self.url, "AWS_CA_BUNDLE": str(self.ca_bundle)}

    def env(self, region: str = DEFAULT_REGION) -> dict[str, str]:
        """The environment a script needs: the endpoint URL, a region, (any) keys, and the
        HTTPS proxy for hard-coded AWS addresses (:meth:`proxy_env`)."""
        return {
            "AWS_ENDPOINT_URL": self.url,
            "AWS_DEFAULT_REGION": region,
            "AWS_ACCESS_KEY_ID": LOCAL_KEYS[0],
            "AWS_SECRET_ACCESS_KEY": LOCAL_KEYS[1],
            **self.proxy_env(),
        }

    def emulator_url(self, endpoint_name: str, region: str = DEFAULT_REGION) -> str | None:
        """The ``http://host:port`` of the emulator serving ``endpoint_name`` now (None when
        it is not in service). boto3's ``sagemaker-runtime`` with this ``endpoint_url``
        skips the local AWS's router: for load tests (this server opens a connection per
        call)."""
        if self.endpoints is None:
            return None
        fleet = self.endpoints.serving(region, endpoint_name)
        return fleet.url if fleet is not None else None

    def start(self) -> LocalAws:
        """Listen and serve on a background thread; returns once the port answers."""
        if self._server is not None:
            return self
        try:
            from moto.core import DEFAULT_ACCOUNT_ID
            from moto.moto_server.werkzeug_app import MotoRequestHandler
            from moto.server import DomainDispatcherApplication, create_backend_app
            from werkzeug.serving import make_server
        except ImportError as exc:
            raise MissingDependencyError("moto", extra="aws", feature="the local AWS") from exc
        if self._data_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="mmelocal-aws-")
            self._data_dir = Path(self._tmp.name)
        self._data_dir.mkdir(parents=True, exist_ok=True)
        account = self.account_id = self._claim_account(DEFAULT_ACCOUNT_ID)
        self._moto_app = DomainDispatcherApplication(create_backend_app)
        self.endpoints = EndpointManager(
            describe=self._plan,
            start_fleet=self._start_fleet,
            forget=self._forget,
            work_dir=self._data_dir / "endpoints",
        )
        self._logs = LogShipper(self._client, account_id=account)
        app = self._app = LocalAwsApp(
            moto_app=self._moto_app,
            endpoints=self.endpoints,
            keys_under=self._keys_under,
            internal=lambda region: self._client("sagemaker", region),
            account_id=account,
            logs=self._logs,
        )

        self._start_clock(app)
        if self.persist:
            app.ready.clear()  # users' calls wait until the saved state is back (start())

        ca = CertificateAuthority(self._data_dir / "ca")
        proxy = HttpsProxy(ca, relay_others=is_loopback(self.host))

        class QuietHandler(MotoRequestHandler):  # one log line per request at DEBUG, not stderr
            def log(self, type: str, message: str, *args: Any) -> None:
                logger.debug("%s " + message, self.address_string(), *args)

            def do_CONNECT(self) -> None:  # HTTPS_PROXY: AWS's hosts served here (.proxy)
                proxy.connect(self)

        try:  # bound here: werkzeug exits the process when the port is taken
            sock = socket.create_server((self.host, self.port), backlog=1024)
        except OSError as exc:
            self._cleanup()
            hint = " (another server uses it: choose another --port)"
            in_use = exc.errno == errno.EADDRINUSE
            # the system's reason, without what create_server adds to it ("(while
            # attempting to bind on address ...)": the address is in the message already)
            reason = (exc.strerror or str(exc)).split(" (while attempting to bind", 1)[0]
            raise UserInputError(
                f"cannot listen on {self.host}:{self.port}: {reason}" + (hint if in_use else "")
            ) from None
        with sock:
            self._server = make_server(
                self.host,
                self.port,
                app,
                threaded=True,
                request_handler=QuietHandler,
                fd=sock.fileno(),
            )
        self.port = self._server.server_address[1]
        ca.ensure()  # made (once per data folder) before anyone is told its path
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="mmelocal-local-aws", daemon=True
        )
        self._thread.start()
        self._logs.start()
        logger.info("local AWS listening on %s (data %s)", self.url, self._data_dir)
        if self.clock is not None:
            self.clock.start()
        if self.persist:
            from mmelocal.localaws import state

            try:
                app.regions.update(
                    state.restore(
                        self._user_client,
                        self._data_dir / "state",
                        keep_saved=self.endpoints.keep_saved,
                    )
                )
            finally:
                app.ready.set()
            self._restored = True  # only a state that was read in full is written back
        return self

    def stop(self) -> None:
        """Save the state (``persist``), stop serving and every endpoint's Triton
        (idempotent)."""
        if self._logs is not None:
            try:  # the last lines, while the server still answers
                self._logs.stop()
            except Exception:
                logger.exception("could not ship the last endpoint log lines")
        if self._server is not None:
            if self._restored and self._app is not None and self._data_dir is not None:
                from mmelocal.localaws import state

                try:
                    state.save(self._user_client, self._data_dir / "state", self._app.regions)
                except Exception:
                    logger.exception("could not save the local AWS state; the last saved one stays")
            if self.clock is not None:
                self.clock.stop()
            self._release_account()
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self.endpoints is not None:
            self.endpoints.close()
        if self.autoscaler is not None:  # resizes under way end with their stopped fleets
            self.autoscaler.wait(timeout_s=30)
        self._cleanup()

    @staticmethod
    def _claim_account(default: str) -> str:
        """This server's moto account (:class:`MotoAccounts`). ``MOTO_ACCOUNT_ID`` in the
        environment overrides moto's header: every server then files under that account,
        and the servers of the process see each other's records (warned)."""
        account = MOTO_ACCOUNTS.claim(default)
        forced = os.environ.get("MOTO_ACCOUNT_ID")
        if forced and account != default:
            logger.warning(
                "MOTO_ACCOUNT_ID=%s is set: moto files every request under it, so this local "
                "AWS and the others running in this process see each other's records "
                "(unset it to keep them apart)",
                forced,
            )
        return account

    def _release_account(self) -> None:
        """The last server of the process to stop clears moto's records (the others'
        accounts are never handed out again while one runs)."""
        if self.account_id is not None:
            MOTO_ACCOUNTS.release(self.account_id, on_last=self._reset_moto)
            self.account_id = None

    def _reset_moto(self) -> None:
        """moto's ``POST /moto-api/reset`` on its application, in-process (no port: a start
        that failed to listen clears it too)."""
        from werkzeug.test import Client

        if self._moto_app is None:
            return
        answer = Client(self._moto_app).post("/moto-api/reset")
        if answer.status_code != 200:
            logger.warning("could not reset moto's state: %s", answer.get_data(as_text=True))

    def _cleanup(self) -> None:
        self._release_account()
        self._moto_app = None
        self._clients.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
            self._data_dir = None

    # -- the clock, CloudWatch and autoscaling ----------------------------------------
    def _start_clock(self, app: LocalAwsApp) -> None:
        clock = self.clock = ControlLoop(
            client_for=self._client,
            running=self._running_variants,
            regions=lambda: sorted(app.regions),
            time_scale=self.time_scale,
        )
        scaler = self.autoscaler = Autoscaler(
            client_for=self._client,
            store=clock.store,
            fleet_of=self._variant_fleet,
            variants_of=self._variant_names,
            show_counts=self._show_counts,
            time_scale=lambda: clock.time_scale,
            regions=lambda: sorted(app.regions),
            start_timeout_s=self._start_timeout_s,
        )
        clock.on_tick.append(scaler.tick)
        app.overlays[CLOUDWATCH_TARGET] = CloudWatchOverlay(
            clock, lambda region: self._client("cloudwatch", region), actions=scaler.alarm_set
        )
        app.overlays[AUTOSCALING_TARGET] = scaler
        for operation in PAGED_OPERATIONS:
            app.corrections[(AUTOSCALING_TARGET, operation)] = paged_records
        app.overlays[LOGS_TARGET] = logs_overlay
        app.update_checks.append(scaler.check_update)

    def _running_variants(self) -> list[Running]:
        out = []
        for state in self.endpoints.states() if self.endpoints is not None else []:
            fleets = state.fleets
            if fleets is not None and state.status in SERVING_ENDPOINT_STATUSES:
                for variant in fleets.variants:
                    out.append(Running(state.region, state.name, variant.name, variant.fleet))
        return out

    def _variant_fleet(self, region: str, endpoint: str, variant: str) -> Fleet | None:
        """The fleet the autoscaler may resize: the endpoint in service, no change under way."""
        state = self.endpoints.get(region, endpoint) if self.endpoints is not None else None
        if state is None or state.status != "InService" or state.fleets is None:
            return None
        found = state.fleets.get(variant)
        return found.fleet if found is not None else None

    def _variant_names(self, region: str, endpoint: str) -> list[str] | None:
        from botocore.exceptions import ClientError

        state = self.endpoints.get(region, endpoint) if self.endpoints is not None else None
        if state is None or state.status in ("Deleting", "Failed"):
            return None
        if state.fleets is not None:
            return state.fleets.names()
        try:
            config = self._client("sagemaker", region).describe_endpoint_config(
                EndpointConfigName=state.config_name
            )
        except ClientError:
            return None
        return [str(v["VariantName"]) for v in config.get("ProductionVariants", [])]

    def _show_counts(
        self,
        region: str,
        endpoint: str,
        variant: str,
        current: int | None,
        desired: int | None,
        updating: bool,
    ) -> bool:
        """An autoscaler resize begins (``updating``: the endpoint claimed under the lock
        UpdateEndpointWeightsAndCapacities takes, Updating, the variant's
        DesiredInstanceCount shown; False when it is not InService: no resize) or ends
        (InService again). CurrentInstanceCount is what serves, read from the fleet."""
        if self.endpoints is None:
            return False
        if updating:
            if self.endpoints.begin_resize(region, endpoint, variant) is None:
                return False
        else:
            self.endpoints.end_resize(region, endpoint)
        state = self.endpoints.get(region, endpoint)
        fleets = state.fleets if state is not None else None
        found = fleets.get(variant) if fleets is not None else None
        if found is not None:
            found.desired_instance_count = (
                desired if desired is not None else found.current_instance_count
            )
        return True

    # -- internals ---------------------------------------------------------------------
    def _client(self, service: str, region: str = DEFAULT_REGION, *, internal: bool = True) -> Any:
        """A boto3 client of this server, one per (kind, service, region): mmelocal's own
        calls (``internal``) skip the endpoint layer; a user's get answers completed by
        mmelocal."""
        key = (internal, service, region)
        with self._clients_lock:
            client = self._clients.get(key)
            if client is None:
                client = self._new_client(service, region, internal=internal)
                self._clients[key] = client
        return client

    def _user_client(self, service: str, region: str = DEFAULT_REGION) -> Any:
        """A boto3 client of this server as a user's (answers completed by mmelocal)."""
        return self._client(service, region, internal=False)

    def _new_client(self, service: str, region: str, *, internal: bool = True) -> Any:

        session = new_session(
            aws_access_key_id=LOCAL_KEYS[0],
            aws_secret_access_key=LOCAL_KEYS[1],
            region_name=region,
        )
        client = aws_client(
            service, LOCAL, session=session, endpoint_url=self.url, s3={"addressing_style": "path"}
        )

        def mark(request: Any, **_: Any) -> None:
            request.headers[OWN_HEADER] = "1"
            if internal:
                request.headers[INTERNAL_HEADER] = "1"

        client.meta.events.register(f"before-sign.{client.meta.service_model.signing_name}", mark)
        return client

    def _keys_under(self, bucket: str, prefix: str) -> list[str] | None:
        """Up to 5 keys under ``prefix`` (None when the bucket does not exist)."""
        from botocore.exceptions import ClientError

        try:
            listing = self._client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=5)
        except ClientError:
            return None
        return [obj["Key"] for obj in listing.get("Contents", [])]

    def _plan(self, region: str, endpoint_name: str, config_name: str) -> EndpointPlan:
        from botocore.exceptions import ClientError

        sagemaker = self._client("sagemaker", region)
        try:
            config = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)
            models = {}
            for variant in config.get("ProductionVariants") or []:
                name = str(variant.get("ModelName", ""))
                if name not in models:
                    models[name] = sagemaker.describe_model(ModelName=name)
        except ClientError as exc:
            raise EndpointFailedError(str(exc.response["Error"].get("Message", exc))) from exc
        plan = plan_endpoint(endpoint_name, config, models)
        plan = dataclasses.replace(
            plan, variants=tuple(dataclasses.replace(v, region=region) for v in plan.variants)
        )
        for fleet in plan.variants:
            keys = self._keys_under(fleet.bucket, fleet.prefix + (fleet.single_model_target or ""))
            if not keys:
                where = fleet.store_url + (fleet.single_model_target or "")
                raise EndpointFailedError(f"Could not find model data at {where}.")
        return plan

    def _start_fleet(self, plan: FleetPlan, work_dir: Path) -> Fleet:
        options = FleetOptions(work_dir=work_dir, **self._fleet_options)  # type: ignore[arg-type]
        fleet = Fleet(plan, s3_client=self._new_client("s3", DEFAULT_REGION), options=options)
        if self.endpoints is None:
            raise EndpointFailedError(SHUT_DOWN_REASON)
        self.endpoints.launches.start(fleet)  # a stop ends it (EndpointManager.close)
        if self._logs is not None:
            try:
                self._logs.watch(plan.region, fleet)
            except Exception:  # logs are a view: an endpoint serves without them
                logger.exception("could not create the log streams of %s", plan.endpoint_name)
        return fleet

    def _forget(self, region: str, endpoint_name: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        if self._server is None:
            return
        try:
            if self.autoscaler is not None:
                self.autoscaler.forget_endpoint(region, endpoint_name)
            self._client("sagemaker", region).delete_endpoint(EndpointName=endpoint_name)
        except (BotoCoreError, ClientError) as exc:
            logger.warning("could not forget endpoint %s: %s", endpoint_name, exc)


__all__ = ["DEFAULT_REGION", "LOCAL_KEYS", "LocalAws"]
