"""Odradek on Apache Spark: the "odradek" data source and sink (Spark's Kafka connector options
and schema, over Odradek's client) and pipelines that run as Spark queries.

    from odradek.spark import local_session

    spark = local_session()          # or: odradek.spark.register(existing_session)
    lines = (spark.readStream.format("odradek")
             .option("kafka.bootstrap.servers", "127.0.0.1:9092")
             .option("subscribe", "streams-plaintext-input")
             .load())

Needs the ``spark`` extra (pyspark, pyarrow) and Java 17+.
"""

from odradek.spark.session import LOCAL_CONF, local_session, register

__all__ = ["LOCAL_CONF", "local_session", "register"]
