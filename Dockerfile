# The static build of redlock-run (scripts/build-static) in an image with nothing else:
#
#   docker build -t redlock-run .
#
# To put it into your job's image (any Linux x86_64 or aarch64 base, glibc or musl or none):
#
#   COPY --from=redlock-run /usr/local/bin/redlock-run /usr/local/bin/redlock-run
#
# The binary needs no shared library. Host names resolve through /etc/hosts and DNS (the
# container runtime provides both files). For rediss:// the image carries the CA bundle at
# the path the binary reads; or give your CA with --tls-ca-cert.

FROM rust:1.89-bookworm AS build
WORKDIR /src
COPY . .
RUN cp "$(scripts/build-static | tail -n 1)" /redlock-run

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /redlock-run /usr/local/bin/redlock-run
ENTRYPOINT ["/usr/local/bin/redlock-run"]
