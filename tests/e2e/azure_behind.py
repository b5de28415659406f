#!/usr/bin/env python3
"""An independent Azure Blob client (azure-storage-blob, which scripts/test installs into .venv)
that reads and writes the store directly, "around" fencegate, for the azure backend's tests.

usage: azure_behind.py --endpoint http://127.0.0.1:PORT/devstoreaccount1 COMMAND ...
  create-container C      create container C (an existing one is not an error)
  put C BLOB FILE|-       upload_blob(overwrite=True) of the bytes of FILE, or of stdin for -
                          (one Put Blob up to the SDK's 64 MiB max_single_put_size, blocks above)
  get C BLOB              the blob's bytes to stdout
  delete C BLOB           Delete Blob
  list C [PREFIX]         the blob names under PREFIX, one per line (--uncommitted: also
                          blobs that have only uncommitted blocks, as a staged upload has)
  props C BLOB            JSON: etag (quoted, as the ETag header), size, content_md5 (base64
                          or null), metadata
  set-meta C BLOB         Set Blob Metadata: the blob's metadata becomes the --meta NAME=VALUE
                          given (none: empty), its bytes unchanged

--account and --key default to Azurite's well-known development account. Exits 1 with a
message on stderr when the store refuses (an absent blob, say), 2 on a usage error.
"""
import argparse
import base64
import json
import sys
from urllib.parse import urlparse

# Azurite's well-known development account (public, in every Azurite and Azure SDK doc).
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def connection_string(endpoint, account, key):
    url = urlparse(endpoint)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise SystemExit(f"azure_behind.py: --endpoint {endpoint!r} is not an http(s) URL")
    return (
        f"DefaultEndpointsProtocol={url.scheme};AccountName={account};AccountKey={key};"
        f"BlobEndpoint={endpoint.rstrip('/')};"
    )


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--endpoint", required=True, help="the account's blob endpoint URL")
    p.add_argument("--account", default=DEV_ACCOUNT)
    p.add_argument("--key", default=DEV_KEY)
    p.add_argument(
        "--api-version",
        default=None,
        help="x-ms-version to send (default: the SDK's newest; Azurite needs "
        "--skipApiVersionCheck for one newer than it knows)",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("create-container")
    c.add_argument("container")
    c = sub.add_parser("put")
    c.add_argument("container")
    c.add_argument("blob")
    c.add_argument("file", help="a file, or - for stdin")
    c.add_argument("--meta", action="append", default=[], help="NAME=VALUE metadata, repeatable")
    c = sub.add_parser("set-meta")
    c.add_argument("container")
    c.add_argument("blob")
    c.add_argument("--meta", action="append", default=[], help="NAME=VALUE metadata, repeatable")
    for name in ("get", "delete", "props"):
        c = sub.add_parser(name)
        c.add_argument("container")
        c.add_argument("blob")
    c = sub.add_parser("list")
    c.add_argument("--uncommitted", action="store_true")
    c.add_argument("container")
    c.add_argument("prefix", nargs="?", default=None)
    args = p.parse_args()

    from azure.core.exceptions import AzureError, ResourceExistsError
    from azure.storage.blob import BlobServiceClient

    kwargs = {"api_version": args.api_version} if args.api_version else {}
    service = BlobServiceClient.from_connection_string(
        connection_string(args.endpoint, args.account, args.key), **kwargs
    )
    try:
        container = service.get_container_client(args.container)
        if args.cmd == "create-container":
            try:
                container.create_container()
            except ResourceExistsError:
                pass
        elif args.cmd == "put":
            data = sys.stdin.buffer.read() if args.file == "-" else open(args.file, "rb").read()
            meta = dict(m.split("=", 1) for m in args.meta) or None
            container.get_blob_client(args.blob).upload_blob(data, overwrite=True, metadata=meta)
        elif args.cmd == "set-meta":
            meta = dict(m.split("=", 1) for m in args.meta)
            container.get_blob_client(args.blob).set_blob_metadata(metadata=meta)
        elif args.cmd == "get":
            data = container.get_blob_client(args.blob).download_blob().readall()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        elif args.cmd == "delete":
            container.get_blob_client(args.blob).delete_blob()
        elif args.cmd == "list":
            include = ["uncommittedblobs"] if args.uncommitted else None
            for blob in container.list_blobs(name_starts_with=args.prefix, include=include):
                name = blob.name
                print(name)
        elif args.cmd == "props":
            props = container.get_blob_client(args.blob).get_blob_properties()
            md5 = props.content_settings.content_md5
            print(
                json.dumps(
                    {
                        "etag": props.etag,
                        "size": props.size,
                        "content_md5": base64.b64encode(md5).decode() if md5 else None,
                        "metadata": dict(props.metadata or {}),
                    },
                    sort_keys=True,
                )
            )
    except AzureError as e:
        code = getattr(e, "error_code", None)
        code = getattr(code, "value", code)  # a StorageErrorCode, or the store's own string
        status = getattr(getattr(e, "response", None), "status_code", None)
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        print(
            f"azure_behind.py: {args.cmd} failed: status {status}, code {code}: {first}",
            file=sys.stderr,
        )
        sys.exit(1)
    except OSError as e:
        print(f"azure_behind.py: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
