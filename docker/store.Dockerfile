# The demo's S3-compatible store: ministack, a pinned release installed when the image is
# built (not at each start), keeping its objects under /data (S3_PERSIST), which the compose
# files put on a volume. A production setup replaces this service with its own S3 store.
FROM python:3.13-slim
RUN pip install --no-cache-dir ministack==1.5.33
ENV GATEWAY_PORT=4566 BIND_HOST=0.0.0.0 S3_PERSIST=1 S3_DATA_DIR=/data
VOLUME /data
EXPOSE 4566
CMD ["ministack"]
