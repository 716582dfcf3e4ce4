"""rankscope: why did my multi-node training job slow down or die?"""
