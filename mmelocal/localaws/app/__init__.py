"""The WSGI application on the local AWS port: moto, with SageMaker's endpoints made real.

Requests are routed by what botocore sends, so one ``AWS_ENDPOINT_URL`` serves every
client:

* ``POST /endpoints/{name}/invocations`` signed for ``sagemaker`` (the runtime client):
  forwarded to the emulator of one of the endpoint's production variants (``TargetVariant``,
  else drawn by weight: :mod:`mmelocal.localaws.variants`); an endpoint not in service, or
  an unknown variant, answers the service's ``ValidationError``;
* ``X-Amz-Target: SageMaker.<Operation>`` for the operations that create, update, delete
  or describe models, configs and endpoints: the service's checks moto lacks
  (:mod:`mmelocal.localaws.checks`), then moto, then the endpoint's lifecycle
  (:mod:`mmelocal.localaws.endpoints`); ``UpdateEndpoint``, which moto does not have, and
  ``UpdateEndpointWeightsAndCapacities`` are answered here;
* everything else (S3, the rest of SageMaker, Application Auto Scaling, STS, ...) goes to
  moto's own dispatcher, which reads the SigV4 credential scope as well.

Requests that came through the HTTPS proxy (``CONNECT`` to an AWS host,
:mod:`mmelocal.localaws.proxy`) arrive here decrypted and are routed the same way.

One module per job:

* :mod:`.dispatch`: :class:`LocalAwsApp`, the routing (``X-Amz-Target``, the runtime's
  paths, the overlays of other JSON services) and the wait for a restore;
* :mod:`.control_plane`: the SageMaker operations completed around moto;
* :mod:`.runtime`: ``InvokeEndpoint`` and the runtime calls refused;
* :mod:`.answers`: JSON answers, errors as moto renders them, operations not implemented;
* :mod:`.wsgi`: what a request says (:func:`credential_scope`, its body and parameters)
  and forwarding it to moto.
"""

from mmelocal.localaws.app.control_plane import MOTO_INSTANCE_TYPE as MOTO_INSTANCE_TYPE
from mmelocal.localaws.app.dispatch import (
    INTERNAL_HEADER,
    OWN_HEADER,
    LocalAwsApp,
)
from mmelocal.localaws.app.dispatch import RESTORE_WAIT_S as RESTORE_WAIT_S
from mmelocal.localaws.app.dispatch import Overlay as Overlay
from mmelocal.localaws.app.wsgi import Forward as Forward
from mmelocal.localaws.app.wsgi import StartResponse as StartResponse
from mmelocal.localaws.app.wsgi import WsgiApp as WsgiApp
from mmelocal.localaws.app.wsgi import credential_scope

__all__ = ["INTERNAL_HEADER", "OWN_HEADER", "LocalAwsApp", "credential_scope"]
