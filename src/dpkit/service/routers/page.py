"""The analysts' page, the OpenAPI reference (``/docs``) and their files, all from this
package and fastapi-offline's Swagger UI files: nothing is fetched from another origin,
and the page's content security policy allows this origin's scripts only."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["STATIC", "SWAGGER", "mount_static", "router"]

STATIC = Path(__file__).parent.parent / "static"
#: Swagger UI's files, installed with fastapi-offline (served at /static/swagger/).
SWAGGER = Path(fastapi_offline.__file__).with_name("static")

router = APIRouter(include_in_schema=False)


@router.get("/")
def page() -> FileResponse:
    return FileResponse(STATIC / "index.html")


@router.get("/docs")
def docs() -> FileResponse:
    """The OpenAPI reference: Swagger UI from installed files, under the page's CSP."""
    return FileResponse(STATIC / "docs.html")


def mount_static(app: FastAPI) -> None:
    """The page's files under /static; Swagger UI's first (/static would take their paths)."""
    app.mount("/static/swagger", StaticFiles(directory=SWAGGER), name="swagger")
    app.mount("/static", StaticFiles(directory=STATIC, check_dir=False), name="static")
