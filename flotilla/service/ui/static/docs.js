// /docs: Swagger UI on this service's own /openapi.json. A file, not an inline script, so the
// Content-Security-Policy can refuse every inline script; validatorUrl null: no call to an outside validator.
window.ui = SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  layout: "BaseLayout",
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
