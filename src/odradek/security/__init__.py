"""Security primitives shared by the broker and the client: TLS contexts from Kafka's `ssl.*`
configs, the certificate principal (Kafka's SslPrincipalMapper), JAAS config lines, and the
SASL mechanisms PLAIN and SCRAM-SHA-256/512 (both sides, sans-I/O)."""
