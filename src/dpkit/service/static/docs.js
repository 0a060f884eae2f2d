// Swagger UI over the service's OpenAPI document. Its files come from this origin
// (fastapi-offline's copies, at /static/swagger/), and this file replaces the inline
// script FastAPI's page would need: the page's CSP allows this origin's scripts only.
// validatorUrl: null keeps Swagger UI from sending the document to its online validator.
window.addEventListener("load", () => {
  window.ui = window.SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    validatorUrl: null,
    deepLinking: true,
    presets: [window.SwaggerUIBundle.presets.apis, window.SwaggerUIBundle.SwaggerUIStandalonePreset],
    layout: "BaseLayout",
  });
});
