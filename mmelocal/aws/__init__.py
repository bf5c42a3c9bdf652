"""The AWS session shared by deploy, the endpoint bench and the local AWS: credentials,
region and clients (:mod:`~mmelocal.aws.session`), and one error message per failed call."""
