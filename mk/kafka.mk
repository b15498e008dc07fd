# A real Apache Kafka broker for development and tests, without Docker (docker/kafka.sh).
# Needs Java 17+ and Maven; the first start downloads the broker's jars from Maven Central.
#
#   make kafka-up            one broker on 127.0.0.1:19092 (written to .kafka/env)
#   make kafka-down
#   make kafka-cluster-up    three brokers on 127.0.0.1:29092,29094,29096 (.kafka/cluster.env)
#   make kafka-cluster-down
#   make kafka-status
#
# Then, e.g.: STREAMWATCH_BOOTSTRAP=127.0.0.1:19092 .venv/bin/pytest -m kafka
# Ports, heap sizes and timeouts: see the environment variables in docker/kafka.sh.

KAFKA_MK_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
KAFKA_SH ?= bash $(KAFKA_MK_ROOT)/docker/kafka.sh

.PHONY: kafka-up kafka-down kafka-cluster-up kafka-cluster-down kafka-status

kafka-up:
	$(KAFKA_SH) up

kafka-down:
	$(KAFKA_SH) down

kafka-cluster-up:
	$(KAFKA_SH) cluster-up

kafka-cluster-down:
	$(KAFKA_SH) cluster-down

kafka-status:
	@$(KAFKA_SH) status || true
