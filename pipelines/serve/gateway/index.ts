/**
 * The gateways of `serve`, loaded together when it runs one (server.ts): one module, so that the
 * gateway, its routes and the capture gateway share one copy of each class.
 */
export { checkGatewayArguments, startGateway, type Gateway } from './gateway.js';
export { gatewayApp, liveTraceRoutes } from './routes.js';
export { loadCaptureConfig } from '../capture/config.js';
export { startCapture } from '../capture/capture.js';
